"""Building blocks the indexes share: atomics for threads, key codes and grids for 8-byte items, sorted runs and stable key orders."""
