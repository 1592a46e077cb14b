"""What the tests share: helpers, fixtures and driver programs, never tests.

Imported as ``support.NAME`` (tests/ is on ``sys.path`` in every test run: it holds the root conftest.py); a test
module imports from here and never from another test module, so moving or deleting a test never breaks another.
``conftest.py`` keeps only pytest's hooks, the leak check and the fixtures every kind of test uses, registered from
:mod:`support.sessions`.
"""
