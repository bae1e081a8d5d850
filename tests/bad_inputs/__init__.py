"""The bad-input corpus: malformed and hostile models, generated (never committed as bytes)."""
