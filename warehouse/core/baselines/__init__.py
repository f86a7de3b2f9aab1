"""The algorithms Sze-Ling's is compared with that keep their own state: the Strobe family
(Zhuge et al. 1996) and periodic recomputation."""
