"""The tiny trained Clover model's data side: synthetic corpus, tokenizer builder and chat template."""
