"""The warehouse: the maintenance core (pure), the Spark + Delta view store, the gRPC service."""
