"""An example graphtool plugin: ``my-identity-remover`` (a pass written by hand) and
``merge-scalar-muls`` (a pass made of one rewrite rule)."""
