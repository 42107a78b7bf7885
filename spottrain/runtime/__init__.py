"""What the KFP component bodies run.

The component definitions in ``components/`` stay thin: their bodies import and
call these modules, so the logic is importable, testable and versioned with the
package inside the image.
"""
