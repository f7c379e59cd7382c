"""bothrows: reproducible reports for LLM-inference engineering."""
