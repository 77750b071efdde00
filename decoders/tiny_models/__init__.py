"""Tiny models of real architectures, made by specexact, for end-to-end engine audits (issue 22).

(Being built: the deterministic making and caching of tiny Llama-family targets and drafts
in the Hugging Face layout, and their float64 reference forward.)
"""
