"""The reports' own error: a report cannot be made from what it was given (no run directory
there, a baseline that names none of the runs). The CLI prints it as one line and exits 2."""


class ReportError(ValueError):
    exit_code = 2
