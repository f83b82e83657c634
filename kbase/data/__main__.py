"""`python -m kbase.data`: write the JSON twins of the YAML data files (see __init__.py)."""

from kbase.data import write_twins

for name in write_twins():
    print(f"wrote kbase/data/{name}")
