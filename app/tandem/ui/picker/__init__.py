"""The pair picker's parts: one tab each (catalog, on disk, by path). Each runs its own workers
and reports to the picker screen by message: `PairChosen` when the user picked a pair to load,
`PickerNote` for a line to show (app/ui/screens/picker.py)."""
