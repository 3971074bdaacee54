"""llama.cpp through its C API: the library and its log (llama_lib, llama_log), a loaded model
and its decoding (model), the contexts' sequences (sequences), what a cache holds (kv_mirror,
prefix), threads, devices and RPC servers (threads, devices, rpc), exact output's kernels
(exact, exact_kernels), a decode's extra rows (hidden_rows) and the vocabulary (vocab).

Importing model loads llama-cpp-python; the engine's face imports it when first asked for."""
