"""toolloop next to its peers: the loop benchmark's workload run in other agent frameworks.

Plain scripts: ``run.py`` measures and prints (see its docstring), ``make_venv.py`` sets up
``.venv-peers/`` with the peers installed and runs ``run.py`` there (``python3 dev.py
peers``). One module per side builds that side's run; the peers are imported lazily, inside
``build()``, so that a peer that is not installed is skipped and everything type-checks
without them.
"""
