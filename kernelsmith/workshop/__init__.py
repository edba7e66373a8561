"""The workshop: evolves a population of candidates against one task (archive, prompts, proposers, engine)."""
