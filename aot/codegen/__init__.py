"""Code generation: kernel IR to an object (llvm.py, parts.py, relocatable.py), the C wrapper and the
build-system files around it (wrapper.py, library.py), rendered from the jinja2 templates in templates/
by the one environment below (an undefined name is an error)."""

import jinja2

TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("aot.codegen", "templates"),
    undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=False, autoescape=False)
