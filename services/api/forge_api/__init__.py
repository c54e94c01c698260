"""Forge api: the HTTP gateway (REST, live streams) over the shared database and bus."""
