"""One autonomous data source: an embedded database, its version numbers, its outbox, its server."""
