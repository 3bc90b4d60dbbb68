"""User-facing text: tables and explanations in English and Chinese."""
