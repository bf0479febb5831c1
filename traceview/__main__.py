from traceview.cli import console

console()
