"""The drafters that read the target's rows: its own MTP heads (mtp.py), and trained drafters
beside it (eagle3.py, dflash.py). They share one base (base.py: following the target's decodes,
drafting autoregressively), one llama.cpp context beside the target (context.py) and the
checks of a drafter file's header (files.py)."""
