"""Reading: PATH -> the profile tables (hosts in parallel, parsed tables cached), with progress."""
