"""The Kafka edge shared by every role: the clients, how they authenticate, topic administration.

- ``partition``: :class:`TopicPartition`, the partition type every layer keys by (pure, no client);
- ``clients``: the factories of every confluent-kafka, aiokafka and Faust client (``KafkaTarget``);
- ``client_types``: the client library's names (errors, offsets, client classes) the rest uses;
- ``admin``: the broker check, partition counts, topic ids, high watermarks, topic creation;
- ``access_admin``: SCRAM credentials and ACLs, as a cluster's administrator sets them;
- ``permission_check``: the permissions a role lacks, as the broker answers;
- ``security``: ``KafkaSecurity``, how each client authenticates (SASL, TLS), and its translations;
- ``oauth``: OAUTHBEARER token sources (a user hook, Amazon MSK IAM);
- ``rdkafka_log``: librdkafka's log lines through Python logging, repeats folded;
- ``wire``: requests encoded by kio (the gateway's codec) sent over aiokafka's connections.

This file imports nothing: importing the partition type does not load a Kafka client library.
"""
