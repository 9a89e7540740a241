"""The knowledge base: data files with a source on every row, loaded into frozen rows."""

from envsolver.kb.load import default_kb, load_kb
from envsolver.kb.model import KnowledgeBase

__all__ = ["KnowledgeBase", "default_kb", "load_kb"]
