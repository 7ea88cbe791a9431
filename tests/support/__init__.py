"""Helpers shared by the test packages (not tests themselves).

pytest puts ``tests/`` on ``sys.path`` (``pythonpath`` in pyproject.toml), so a test imports
them as ``from support.netns import veth_net``; test modules never import each other
(``--import-mode=importlib``): what two test files share lives here.
"""
