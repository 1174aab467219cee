from aot.cli import entry

entry()
