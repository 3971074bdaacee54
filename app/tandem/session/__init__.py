"""What every front-end does the same way: the layer under the CLI, the app, the benchmark and
the server.

    runner.py    the pair and its engine's thread: the one way any of them gets an answer
    serial.py    the engine answering one request at a time (batched: engine/decoding/batch.py)
    handoff.py   events from the engine's thread to a front-end's loop
    options.py   every option a user sets, declared once (flags, settings, request fields derive
                 from it); layered once (request, settings, pair, defaults) into a
                 GenerationConfig and LoadOptions
    pairs.py     which models: a catalog pair (downloaded with the front-end's consent) or files
    prompts.py   the one rule for turning messages or text into a prompt
    collect.py   running a generation to the end and keeping what it produced; stats as JSON

No UI code (no Textual, no terminal I/O): front-ends pass in what needs asking the user.
"""
