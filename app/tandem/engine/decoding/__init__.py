"""The speculative loop: one generation (generation: prefill, then rounds), who drafts each round
and how many (scheduler), a round's verify and accept (round), several sequences in one batch
(batch, batch_costs), the measured costs (costs), an answer's bookkeeping (answer) and the
speedup's meter (speedup). The drafters it asks for tokens are in ../drafters."""
