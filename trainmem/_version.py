"""trainmem's version (pyproject.toml's ``version``), in a module of its own: the package's modules read it here,
not through ``trainmem`` itself, whose lazy names import the whole library."""

__version__ = "0.1.0"
