"""`jobtpu serve`: the home's views in a browser, and the acts of the CLI behind one person's login
(docs/reference/commands.md §2.29). An optional extra (`pip install jobtpu[web]`): nothing outside
this package (whose serve.py adds the `serve` command) imports Starlette, uvicorn or Jinja2, so
`status`, `manage` and `--help` never load them."""
