"""The integration recipes of docs/howto.md ("Enqueue from your web framework").

Each module here is shown whole in the how-to, and tests/integration/test_recipes.py
runs it against the real database and checks that the how-to still shows it as it is.
"""
