"""The server's routes, one router per group: the models and the health check (models.py),
OpenAI's chat and text completions (completions.py)."""
