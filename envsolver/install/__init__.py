"""Installing a lock without conda: archives proven and checked, the package cache, prefix metadata."""
