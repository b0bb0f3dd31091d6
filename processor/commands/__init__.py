"""CLI commands, one module each; processor/cli.py registers them in its parser."""
