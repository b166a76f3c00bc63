
half_plus_two13tensorflow_savedmodel"
xFP32ÿÿÿÿÿÿÿÿÿ"
anyBYTES
ÿÿÿÿÿÿÿÿÿ*
yFP32ÿÿÿÿÿÿÿÿÿ