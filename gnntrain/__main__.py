from gnntrain.cli import entry

entry()
