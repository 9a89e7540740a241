"""Downloads: one URL into a file, with the user's network settings, bounded in size and time."""
