"""The I/O that every process of the federation shares, kept out of the model (fedmodel): the gRPC
channels and listening ports with their TLS (`channels`), and the message log's files, written off
the messages' path and read back by the checker and the bench (`message_log`)."""
