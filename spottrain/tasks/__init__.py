"""The built-in tasks, each a user of the public Task API like any user's task."""
