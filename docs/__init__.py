"""The documentation's generated parts: `python -m docs.build` writes them, tests/test_docs.py checks them."""
