"""The evolutionary search: archive, selection, mutators (params, llm), prompts and the loop."""
