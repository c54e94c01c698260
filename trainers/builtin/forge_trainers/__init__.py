"""Forge's built-in trainers, written against the public Trainer SDK only."""
