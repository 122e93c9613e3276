"""The bps-assets command line (click). Library code never imports from here."""
