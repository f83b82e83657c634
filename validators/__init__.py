"""Validators: run skills' snippets in a sandbox, keep a verdict ledger, judge staleness.

Nothing here imports torch, triton, chromadb or the search stack at module level: `kbase verify`
must run on a GPU box that has only the CUDA toolchain, torch/triton and a few small packages.
The public entry point for the rest of kbase is kbase.validators.status.skill_statuses."""
