"""GGUF files and what is checked in them before llama.cpp sees them: the header read without
loading weights (gguf_file, gguf_info), the checks that keep llama.cpp from aborting on a bad
file (native_checks, template_sizes), whether a draft fits a target (compat), what a model needs
in memory (memory) and whether its architecture carries a state (recurrence).

Nothing here loads llama.cpp's bindings."""
