"""The `envsolver` command: every click command, and the rendering of what they print."""
