"""Protobuf and gRPC modules generated from proto/ by ``make proto``."""
