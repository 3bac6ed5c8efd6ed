"""The embedding family: what the embedding lookup and its gradient share (``spec.py``)."""
