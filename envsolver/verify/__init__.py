"""`envsolver verify`: probe (runs in the target python) -> facts -> checks (pure) -> report."""
