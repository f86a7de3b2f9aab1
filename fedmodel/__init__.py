"""The model every side of the federation speaks: catalog, view definition, transactions, row codec."""
