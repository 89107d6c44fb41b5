"""Templates and static files of the web page, shipped inside the wheel as dagrun.web."""
