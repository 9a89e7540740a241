"""Writers: Plan -> file text (pure, deterministic) and a safe file writer."""
