"""The jinja2 templates of what a build writes beside its object (model.h, model.c, CMakeLists.txt, model.mk,
toolchain.cmake), and the one environment that renders them: an undefined name is an error."""

import jinja2

TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("aot.codegen", "templates"),
    undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=False, autoescape=False)
