"""``localspec bench``: suites of prompts run in every mode side by side, and what they measured."""
