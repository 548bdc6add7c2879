"""A chat with a loaded pair: the session (models, engine, prompts), the conversation the
interfaces drive, its store on disk and the split of thinking from the answer. Draws nothing."""
