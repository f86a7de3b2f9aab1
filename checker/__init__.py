"""The consistency checker: an independent oracle and the Strobe paper's consistency levels."""
