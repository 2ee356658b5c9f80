"""Helpers shared by tests: small probe tools and event utilities."""
