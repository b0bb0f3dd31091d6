"""`make bench`: the offload and read paths measured against the practical limits of the machine.

Every figure is measured next to its baseline in the same run and reported as a ratio, because these
machines are shared and noisy. Never part of `make test`.
"""
