"""Resolving a target against the knowledge base: the stack, with a reason for each choice."""
