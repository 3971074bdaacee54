"""Text in and out: a conversation rendered with the model's own chat template
(chat_template, prompting), a rendered prompt tokenized with its special tokens
(prompt_tokens), token ids streamed back to text (text_stream) and text re-encoded between two
tokenizers (retokenize)."""
