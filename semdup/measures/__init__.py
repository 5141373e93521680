"""The official measures, the significance test, the evaluation protocols and the fitting by them (numpy, no
torch): one package every layer above the pure core may import. Imports nothing from semdup but ``semdup.core``."""
